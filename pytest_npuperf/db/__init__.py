"""The data contract (docs/format.md §1-4): layout, cells, columns, signatures, tables.

Nothing in this package imports from the rest of the project.
"""
