"""Model hubs: reference resolution (resolve), hub clients (clients), cached snapshots (snapshot)."""
