"""The local autocomplete: a FastAPI server that keeps each writer's model state, and the compose page."""
