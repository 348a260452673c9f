"""peach."""
