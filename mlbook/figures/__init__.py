"""Figures the chapters draw, one module per chapter. Each function returns a
matplotlib Figure and takes plain numbers, so a slider can call it."""
