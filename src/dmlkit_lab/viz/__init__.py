"""The lab's figures: the geometry of one run (``geometry_plots``) and of run groups side by side (``geometry_compare``)."""
