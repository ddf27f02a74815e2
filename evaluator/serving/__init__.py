"""The gRPC service over the history and the loop's status, and its server."""
