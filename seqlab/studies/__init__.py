"""Studies of trained models: compare, inspection views, the lecture's lessons, and the demo."""
