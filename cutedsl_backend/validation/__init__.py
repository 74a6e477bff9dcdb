"""Validation harness: tolerance policy, matrix, budgets, compile gates, GPU checks, reports."""
