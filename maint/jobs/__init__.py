"""Scheduled jobs: the catalogue (package data in maint.jobs.catalogue) and the loop that runs it."""
