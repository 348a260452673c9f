"""Tests of the bundled UCP merchant (samples.ucp_merchant)."""
