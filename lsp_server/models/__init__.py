"""Named model pairs, fetching and verifying the default pair, and loading models."""
