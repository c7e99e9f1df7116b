"""The Prefetcher: the reference protocol run live over a numpy slot pool."""
