"""Models: the preset registry, loading of models/tokenizers/adapter chains, and the built-in toy."""
