(* The overwhelm rules' bounds (spec/rules.md sections "Rule overwhelm_free",
   "Rule overwhelm_perm", "Rule overwhelm_family" Lemma R / R-perm):
   the per-position maximum over free strings, the assignment-dual bound for
   orderings of a multiset, and Lemma R.  Only the standard library. *)
From Coq Require Import Reals Lra Lia List Permutation.
From MaxK Require Import Sums Softmax SubsetSums.
Import ListNotations.
Open Scope R_scope.

(** overwhelm_free: with free positions j < J holding tokens of the alphabet A,
    G(t) = F + sum_j c_j(t_j) <= F + sum_j M_j  whenever M_j >= c_j(u) for u in A. *)
Theorem overwhelm_free_bound : forall (F : R) (c : nat -> nat -> R) (A : list nat) J
                                      (M : nat -> R) (tok : nat -> nat),
  (forall j, (j < J)%nat -> In (tok j) A) ->
  (forall j u, (j < J)%nat -> In u A -> c j u <= M j) ->
  F + sumR (fun j => c j (tok j)) J <= F + sumR M J.
Proof.
  intros F c A J M tok Htok HM. apply Rplus_le_compat_l, sumR_le.
  intros j Hj. apply HM; [assumption | apply Htok; assumption].
Qed.

Lemma sumR_lsum : forall f n, sumR f n = lsum (map f (seq 0 n)).
Proof.
  intros f n; induction n; [reflexivity|].
  rewrite seq_S, map_app, lsum_app. simpl sumR. rewrite IHn. simpl. lra.
Qed.

(** overwhelm_perm, weak duality of the assignment LP: for any potentials u
    and v_a >= c[j][a] - u_j (the checker sets v_a = max_j (c[j][a] - u_j),
    rounded up), every bijection sigma of the free positions onto the
    multiset's elements has sum_j c[j][sigma j] <= sum_j u_j + sum_a v_a. *)
Theorem overwhelm_perm_dual : forall n (c : nat -> nat -> R) (u v : nat -> R) (sigma : nat -> nat),
  Permutation (map sigma (seq 0 n)) (seq 0 n) ->
  (forall j a, (j < n)%nat -> (a < n)%nat -> c j a - u j <= v a) ->
  sumR (fun j => c j (sigma j)) n <= sumR u n + sumR v n.
Proof.
  intros n c u v sigma Hperm Hv.
  assert (Hrange : forall j, (j < n)%nat -> (sigma j < n)%nat).
  { intros j Hj. assert (H : In (sigma j) (seq 0 n)).
    { apply (Permutation_in _ Hperm). apply in_map, in_seq. lia. }
    apply in_seq in H. lia. }
  apply Rle_trans with (sumR (fun j => u j + v (sigma j)) n).
  - apply sumR_le. intros j Hj. specialize (Hv j (sigma j) Hj (Hrange j Hj)). lra.
  - rewrite sumR_plus. apply Rplus_le_compat_l. right.
    rewrite !sumR_lsum. rewrite <- map_map. apply lsum_perm, Permutation_map. exact Hperm.
Qed.

(** overwhelm_family Lemma R: if every position's w_i (y_i - lambda) is at most
    M_i (its own term, or the max over the alphabet at a free position) and
    sum_i M_i < 0, the attention average sum_i a_i y_i is <= lambda. *)
Theorem lemma_R : forall (s y : nat -> R) k lam (M : nat -> R), (0 < k)%nat ->
  (forall i, (i < k)%nat -> exp (s i) * (y i - lam) <= M i) ->
  sumR M k < 0 ->
  sumR (fun i => softmax s k i * y i) k <= lam.
Proof.
  intros s y k lam M Hk HM HS. rewrite softmax_average by assumption.
  apply average_le_iff; [assumption | intros; apply exp_pos |].
  left. apply Rle_lt_trans with (sumR M k); [|assumption].
  apply sumR_le. assumption.
Qed.
