"""What a run follows outside itself: an evaluator's metrics (``--stop-when``) and a pretraining's
encoder (``--follow-encoder``)."""
