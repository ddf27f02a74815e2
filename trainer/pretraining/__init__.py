"""``showtell pretrain``'s library: the encoder trained on the synthetic scenes' labels, on the
trainer's own controller."""
