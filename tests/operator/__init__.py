"""Tests of the operator sync core and the knowledge-sync CLI."""
