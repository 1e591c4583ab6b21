"""The optimizer study's grid kit: the grid's cells and their markers (`grid`) and its
results figures (`figures`).
"""
