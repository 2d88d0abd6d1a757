"""The fixtures of the view's tests (view_fixtures.py): the runs and a view process."""

from view_fixtures import runs, viewer  # noqa: F401
