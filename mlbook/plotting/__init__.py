"""Matplotlib pieces: the book's figure style and live (slider) figures."""
