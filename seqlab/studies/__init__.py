"""Studies of trained models: compare, the lecture's lessons, and the demo (their figures
and pages are drawn with `seqlab.inspection.figures` and `seqlab.inspection.html`)."""
