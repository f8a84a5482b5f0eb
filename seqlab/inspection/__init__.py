"""What a trained model computes, made visible: probes (attention maps, soft lookups, gates, position
vectors), their figures and self-contained pages. Product code: the server's "why this suggestion" view,
the API's `Run.attention` / `Run.inspect`, and `seqlab attention` / `seqlab inspect` read it; the studies
draw their own pages with its `figures` and `html`."""
