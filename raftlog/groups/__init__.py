"""Consumer groups: the group coordinator and its `__consumer_offsets` records."""
