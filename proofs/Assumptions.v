(* Print Assumptions on every main theorem; proofs/check.sh parses this
   output and fails unless only the allowed Reals axioms appear. *)
From MaxK Require Import Sums Softmax UpperBound Counting Classes Cubic Exact SubcubicGap
  SubsetSums CubicSound Rowdiff Overwhelm Counterexamples.

Print Assumptions Softmax.convex_comb_between.
Print Assumptions Softmax.softmax_between.
Print Assumptions Softmax.softmax_shift.
Print Assumptions Softmax.sign_form.
Print Assumptions Softmax.scale_sign.
Print Assumptions Softmax.average_le_iff.
Print Assumptions Softmax.affine_neg_at_ends.
Print Assumptions Softmax.max_token_weight.
Print Assumptions UpperBound.ub_mul.
Print Assumptions Counting.length_fill.
Print Assumptions Classes.class_size.
Print Assumptions Classes.classes_total.
Print Assumptions Cubic.cubic_count.
Print Assumptions Cubic.cubic_class_sound.
Print Assumptions Cubic.cubic_c0_sound.
Print Assumptions Cubic.cubic_lemma4.
Print Assumptions Exact.E1_total.
Print Assumptions Exact.E1_class_residue.
Print Assumptions Exact.E2.
Print Assumptions Exact.E2_integer_term.
Print Assumptions Exact.E2_integer_sum.
Print Assumptions Exact.exact_counts_add.
Print Assumptions SubcubicGap.gap_class_count.
Print Assumptions SubcubicGap.subcubic_count.
Print Assumptions SubcubicGap.lemma_S.
Print Assumptions SubcubicGap.lemma5.
Print Assumptions SubcubicGap.lemma6.
Print Assumptions SubcubicGap.coeffs_max_diff.
Print Assumptions SubcubicGap.coeffs_mean_diff.
Print Assumptions SubcubicGap.coeffs_min_shift.
Print Assumptions SubcubicGap.subcubic_class_sound.
Print Assumptions Counterexamples.E2_lower_end_every_sign_false.
Print Assumptions Counterexamples.E2_upper_end_every_sign_false.
Print Assumptions Counterexamples.gap_strict_overcount_false.
Print Assumptions Counterexamples.gap_count_m_minus_g_false.
Print Assumptions SubsetSums.firstn_sorted_le.
Print Assumptions SubsetSums.subset_sum_lower.
Print Assumptions SubsetSums.subset_sum_upper.
Print Assumptions SubsetSums.placement_bounds.
Print Assumptions CubicSound.cubic_sound.
Print Assumptions Rowdiff.lemma20.
Print Assumptions Rowdiff.lemma22_step.
Print Assumptions Rowdiff.thm24.
Print Assumptions Overwhelm.overwhelm_free_bound.
Print Assumptions Overwhelm.overwhelm_perm_dual.
Print Assumptions Overwhelm.lemma_R.
Print Assumptions Counterexamples.lemma20_no_abs_false.
