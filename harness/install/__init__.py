"""Installing and checking the frameworks: install variants (``variant``), their lock files
(``lock``), named environments for version comparisons (``environments``) and ``doctor``.

``variant`` runs before any environment exists and uses the standard library only."""
