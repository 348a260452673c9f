"""syncserver."""
