"""How a run is spread: the cluster (flags or TF_CONFIG) and the ``tf.distribute`` strategy."""
