"""Subscriptions: the cursor, the Key_Shared selectors and the dispatch planner (pure cores)."""
