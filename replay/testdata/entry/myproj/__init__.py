"""A tiny user project: the training step the torch backend's --entry test replays."""
