"""The gRPC contract's Python side: transport security and the metrics client.

With the generated ``showtell.v1`` modules (from ``protos/showtell/v1/metrics.proto``) this is
the contract layer: the trainer (early stop), the evaluator (server) and the command line
(``showtell metrics``, the demo) all build on it; it imports neither service.
"""
