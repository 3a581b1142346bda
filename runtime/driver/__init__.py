"""The driver: ``Trainer`` runs the async (ECHO-2) or sync loop over the planes; setup, launch (local or a
placed learner), run directory, metrics, plots, held-out evaluation and experiment tracking."""
