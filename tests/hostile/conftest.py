"""Fixtures of the hostile-input tests: the second user (``second_user.py``)."""

from __future__ import annotations

from second_user import second_user as second_user
