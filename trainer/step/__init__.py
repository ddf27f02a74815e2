"""What a step is: ``CaptionTask`` (model, optimizers, datasets, the traced step and loop), the
optimizers and their schedules, and the transfer-learning phase that says which parts train."""
