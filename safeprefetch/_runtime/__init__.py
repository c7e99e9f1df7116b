"""The runtime: the model on real threads, interrupt safety, and the injector that checks it."""
