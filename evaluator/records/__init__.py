"""What an evaluation leaves: the history, its durable record, the actions told of it, the work dir."""
