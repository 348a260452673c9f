"""Tests of the bundled UCP merchant (strabo.merchant)."""
