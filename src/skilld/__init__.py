"""skilld: a background daemon that lets an AI agent learn reusable skills from its sessions."""

__version__ = "0.1.0"
