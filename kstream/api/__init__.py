"""The topology API users import."""
