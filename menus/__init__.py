"""Interactive questionary menus. They build recipes and hand them to swiftbox.runner; no torch here."""
