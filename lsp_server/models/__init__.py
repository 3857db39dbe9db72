"""Where models come from: named model pairs (registry), fetching and verifying the default
pair (fetch), and loading models from disk (loader). How their layers run fast is kernels/."""
