"""Ahoy's evaluation scenarios on strabo: one LLM agent, coded counterparts."""
