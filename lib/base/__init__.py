"""Leaf helpers every layer uses, importing nothing from lib: one-line user errors
(`errors`), atomic and durable writes (`atomic`, `durable`), failpoints for the kill tests
(`faults`) and progress lines (`progress`).
"""
