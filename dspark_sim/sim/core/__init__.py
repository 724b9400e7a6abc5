"""The simulator's bottom room: the request table, units and the small rules (imports nothing of sim/)."""
