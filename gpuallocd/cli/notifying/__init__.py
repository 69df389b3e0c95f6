"""Notification commands: your channels and thresholds, your feed, your notifier
(docs/cli.md, "Notifications"; docs/notifications.md).

notify.py  notify add|list|remove|test|thresholds|feed, notify-agent
"""
