"""Planner: topology -> stages -> tasks, internal topics, checkpoint participants."""
