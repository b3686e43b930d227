"""Interactive questionary menus (`./launch.sh` with no command). They build recipes and hand them to
swiftbox.runner; they never do a step's work and never import torch (the device probe does, in a thread).

main.py (main menu and loop) -> flows.py (one flow per item, built from questions.py) -> review.py
(YAML, run / save / edit / back). See docs/menu.md.
"""
