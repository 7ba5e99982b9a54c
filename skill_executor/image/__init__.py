"""The runner image: its inputs, pins and tag (:mod:`.inputs`, pure), and its build and
contents listing (:mod:`.build`, which needs the Docker SDK: import it by name)."""
