"""Measuring: the clock, statistics, device limits and what else the machine was doing."""
