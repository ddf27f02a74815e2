"""The Show-and-Tell network, beam search, validation metrics, SavedModel export and the model
directory's record of what writes it."""
