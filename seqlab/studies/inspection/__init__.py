"""`seqlab attention` and `seqlab inspect`: probes of what a model computes, plots, self-contained pages."""
