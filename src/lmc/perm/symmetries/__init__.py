"""The symmetries of a model and the maps that act on them (no method that chooses a map).

What lmc knows of a model's symmetries, read off the model itself:

- :mod:`.trace` traces any model with torch.fx and unions its channels into permutation groups
  (:func:`lmc.perm.spec_from_model`), giving a :class:`~.permutation_spec.PermutationSpec`
  (:mod:`.permutation_spec`: each parameter's axes and the group, if any, that permutes them);
- :mod:`.permutations`: applying, composing, inverting and drawing permutations, and the
  matching objective Σ⟨θ_A, π(θ_B)⟩; :mod:`.head_permutations`: permutations of attention
  heads with a permutation inside each head;
- beyond permutations: :mod:`.axis_roles` (how each axis transforms), :mod:`.residual_stream`
  (the residual stream's writers, norms and readers, read off the traced graph),
  :mod:`.symmetry_spec` (axis roles and each group's admissible kind of map),
  :mod:`.within_heads` (rotary planes, grouped-query maps), :mod:`.transforms` (the kinds of
  map: permutation, orthogonal, invertible, rotary planes), :mod:`.alignment_map` (an
  ``Alignment``: one map per group, applied to a state), :mod:`.canonical_form` (the canonical
  form of a pre-norm transformer, whose stream admits orthogonal maps), :mod:`.widening`
  (embedding a narrow transformer into a wide one, function preserved) and
  :mod:`.example_inputs` (a batch a model accepts, to trace it).

Their public names are imported from :mod:`lmc.perm`; the alignment methods that choose a map
are in :mod:`lmc.perm.methods`, the assignment solvers in :mod:`lmc.perm.solvers`.
"""
