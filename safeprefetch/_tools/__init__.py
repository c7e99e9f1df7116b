"""Tools on top of checking and the runtime: explain and play, SVG rendering, SPIN."""
