"""A case's arguments as real tensors: read from the dump's tensor files, or synthesised from recorded statistics."""
