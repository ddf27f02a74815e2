"""The ``showtell`` command: one entry point dispatching to the services' CLIs."""
