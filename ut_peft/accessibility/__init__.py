"""The accessibility evaluator: how many sequences a frozen causal LM can be made to emit."""

from .bounds import SupportStats, ball_slope_bound, box_slope_bound, measure_support, slope_bounds
