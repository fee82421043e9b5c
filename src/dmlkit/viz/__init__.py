"""Figures of a run: training curves, embedding projections, distance histograms."""
