"""The bundled console themes, shipped inside the package as `loopdeck.themes`."""
