(* Softmax and attention bounds used by every accuracy rule
   (spec/theorem.md section 5, spec/rules.md preamble, cubic Lemma 3,
   subcubic_gap Lemma 7, overwhelm_family Lemma R).
   Only the standard library. *)
From Coq Require Import Reals Lra Lia.
From MaxK Require Import Sums.
Open Scope R_scope.

(* softmax over positions 0..k-1 of scores s *)
Definition softmax (s : nat -> R) (k i : nat) : R :=
  exp (s i) / sumR (fun j => exp (s j)) k.

Lemma sum_exp_pos : forall s k, (0 < k)%nat -> 0 < sumR (fun j => exp (s j)) k.
Proof. intros; apply sumR_pos; [assumption|]. intros; apply exp_pos. Qed.

Lemma softmax_pos : forall s k i, (0 < k)%nat -> 0 < softmax s k i.
Proof.
  intros s k i Hk; unfold softmax.
  apply Rdiv_lt_0_compat; [apply exp_pos | apply sum_exp_pos; assumption].
Qed.

Lemma softmax_sum_1 : forall s k, (0 < k)%nat -> sumR (softmax s k) k = 1.
Proof.
  intros s k Hk; unfold softmax.
  rewrite sumR_div_r. field. apply Rgt_not_eq, sum_exp_pos; assumption.
Qed.

(* The weighted average written with the unnormalised weights w_i = exp(s_i). *)
Lemma softmax_average : forall s x k, (0 < k)%nat ->
  sumR (fun i => softmax s k i * x i) k
  = sumR (fun i => exp (s i) * x i) k / sumR (fun j => exp (s j)) k.
Proof.
  intros s x k Hk; unfold softmax.
  rewrite <- sumR_div_r. apply sumR_ext; intros i _. field.
  apply Rgt_not_eq, sum_exp_pos; assumption.
Qed.

(** Convex combinations lie between the min and the max of the values.
    Stated for any weights a_i >= 0 summing to 1, then for softmax. *)
Theorem convex_comb_between : forall (a x : nat -> R) k lo hi,
  (forall i, (i < k)%nat -> 0 <= a i) -> sumR a k = 1 ->
  (forall i, (i < k)%nat -> lo <= x i <= hi) ->
  lo <= sumR (fun i => a i * x i) k <= hi.
Proof.
  intros a x k lo hi Ha H1 Hx; split.
  - replace lo with (sumR (fun i => a i * lo) k) by (rewrite sumR_scal_r, H1; lra).
    apply sumR_le; intros i Hi. apply Rmult_le_compat_l; [apply Ha; lia | apply Hx; lia].
  - replace hi with (sumR (fun i => a i * hi) k) by (rewrite sumR_scal_r, H1; lra).
    apply sumR_le; intros i Hi. apply Rmult_le_compat_l; [apply Ha; lia | apply Hx; lia].
Qed.

Theorem softmax_between : forall s x k lo hi, (0 < k)%nat ->
  (forall i, (i < k)%nat -> lo <= x i <= hi) ->
  lo <= sumR (fun i => softmax s k i * x i) k <= hi.
Proof.
  intros s x k lo hi Hk Hx. apply convex_comb_between; auto.
  - intros; left; apply softmax_pos; assumption.
  - apply softmax_sum_1; assumption.
Qed.

(** Shift invariance: softmax(s - c) = softmax(s) for any real c
    (used by forward_brute_force, overwhelm_family and Lemma S). *)
Theorem softmax_shift : forall s c k i, (0 < k)%nat ->
  softmax (fun j => s j - c) k i = softmax s k i.
Proof.
  intros s c k i Hk; unfold softmax.
  assert (E : forall j, exp (s j - c) = exp (s j) * exp (- c)).
  { intros j; unfold Rminus; apply exp_plus. }
  rewrite E. rewrite (sumR_ext _ (fun j => exp (s j) * exp (- c))) by (intros; apply E).
  rewrite sumR_scal_r. field.
  split; apply Rgt_not_eq; (apply exp_pos || (apply sum_exp_pos; assumption)).
Qed.

(** The decomposition's corollary (theorem.md section 5, "sign form"):
    if l_o = EU_o + sum_i a_i (V_i o + P_i o) with softmax weights a, then
    l_o - l_m = (sum_i w_i x_i(o)) / (sum_i w_i) with w_i = exp(s_i) and
    x_i(o) = (EU_o - EU_m) + (V_i o - V_i m) + (P_i o - P_i m);
    so l_o < l_m iff sum_i w_i x_i(o) < 0. *)
Definition logit (s : nat -> R) (k : nat) (EU : nat -> R) (V P : nat -> nat -> R) (o : nat) : R :=
  EU o + sumR (fun i => softmax s k i * (V i o + P i o)) k.

Definition xdiff (EU : nat -> R) (V P : nat -> nat -> R) (i o m : nat) : R :=
  (EU o - EU m) + (V i o - V i m) + (P i o - P i m).

Theorem sign_form_identity : forall s k EU V P o m, (0 < k)%nat ->
  logit s k EU V P o - logit s k EU V P m
  = sumR (fun i => exp (s i) * xdiff EU V P i o m) k / sumR (fun j => exp (s j)) k.
Proof.
  intros s k EU V P o m Hk.
  rewrite <- softmax_average by assumption. unfold xdiff.
  assert (H1 := softmax_sum_1 s k Hk).
  rewrite (sumR_ext _ (fun i => softmax s k i * (EU o - EU m)
                              + (softmax s k i * (V i o + P i o)
                                 - softmax s k i * (V i m + P i m))))
    by (intros; ring).
  rewrite sumR_plus, sumR_minus, (sumR_scal_r (EU o - EU m) (softmax s k)), H1.
  unfold logit; ring.
Qed.

Theorem sign_form : forall s k EU V P o m, (0 < k)%nat ->
  sumR (fun i => exp (s i) * xdiff EU V P i o m) k < 0 ->
  logit s k EU V P o < logit s k EU V P m.
Proof.
  intros s k EU V P o m Hk H.
  assert (Hpos := sum_exp_pos s k Hk).
  assert (logit s k EU V P o - logit s k EU V P m < 0).
  { rewrite sign_form_identity by assumption.
    unfold Rdiv. assert (0 < / sumR (fun j => exp (s j)) k) by (apply Rinv_0_lt_compat; assumption).
    nra. }
  lra.
Qed.

(** The sign of a weighted sum is unchanged when every weight is multiplied by
    the same positive number (the normalisation of softmax, the exponent of
    rule exact's integers, Lemma S's exp(-c_q)). *)
Theorem scale_sign : forall (w x : nat -> R) k p, 0 < p ->
  (sumR (fun i => (p * w i) * x i) k < 0 <-> sumR (fun i => w i * x i) k < 0).
Proof.
  intros w x k p Hp.
  rewrite (sumR_ext _ (fun i => p * (w i * x i))) by (intros; ring).
  rewrite sumR_scal_l. split; intro H.
  - destruct (Rlt_or_le (sumR (fun i => w i * x i) k) 0) as [|Hle]; [assumption|].
    exfalso. assert (0 <= p * sumR (fun i => w i * x i) k) by (apply Rmult_le_pos; lra). lra.
  - nra.
Qed.

(** overwhelm_family Lemma R, the fractional form: for positive weights,
    sum_i a_i y_i <= lambda  iff  sum_i w_i (y_i - lambda) <= 0. *)
Theorem average_le_iff : forall (w y : nat -> R) k lam, (0 < k)%nat ->
  (forall i, (i < k)%nat -> 0 < w i) ->
  (sumR (fun i => w i * y i) k / sumR w k <= lam
   <-> sumR (fun i => w i * (y i - lam)) k <= 0).
Proof.
  intros w y k lam Hk Hw.
  assert (HW : 0 < sumR w k) by (apply sumR_pos; assumption).
  rewrite (sumR_ext (fun i => w i * (y i - lam)) (fun i => w i * y i - lam * w i))
    by (intros; ring).
  rewrite sumR_minus, sumR_scal_l. split; intro H.
  - apply (Rmult_le_compat_r (sumR w k)) in H; [|lra].
    unfold Rdiv in H. rewrite Rmult_assoc, Rinv_l in H by lra. lra.
  - apply (Rmult_le_reg_r (sumR w k)); [assumption|].
    unfold Rdiv. rewrite Rmult_assoc, Rinv_l by lra. lra.
Qed.

(** Placements (cubic Lemma 3, subcubic_gap Lemma 7): an affine function of S
    on [lo, hi] is at most the larger of its values at the ends. *)
Theorem affine_le_max_ends : forall a b lo hi S,
  lo <= S <= hi -> a + b * S <= Rmax (a + b * lo) (a + b * hi).
Proof.
  intros a b lo hi S [H1 H2].
  destruct (Rle_or_lt 0 b) as [Hb|Hb].
  - apply Rle_trans with (a + b * hi); [|apply Rmax_r].
    assert (b * S <= b * hi) by nra. lra.
  - apply Rle_trans with (a + b * lo); [|apply Rmax_l].
    assert (b * lo >= b * S) by nra. lra.
Qed.

Corollary affine_neg_at_ends : forall a b lo hi S,
  lo <= S <= hi -> a + b * lo < 0 -> a + b * hi < 0 -> a + b * S < 0.
Proof.
  intros a b lo hi S HS Hlo Hhi.
  eapply Rle_lt_trans; [apply (affine_le_max_ends a b lo hi S HS)|].
  unfold Rmax; destruct (Rle_dec _ _); assumption.
Qed.

(** The weight of the max token's copies (cubic Lemma 3, subcubic_gap Lemma 7):
    with placement P (positions i < n where p i is true) and S = sum_{i in P} beta_i,
    the positions outside P weigh exactly (B - S) e_m, B = sum_{i<n} beta_i. *)
Theorem max_token_weight : forall (p : nat -> bool) (beta : nat -> R) em n,
  sumR (fun i => if p i then 0 else beta i * em) n
  = (sumR beta n - sumR (fun i => if p i then beta i else 0) n) * em.
Proof.
  intros p beta em n; induction n; simpl; [lra|].
  rewrite IHn; destruct (p n); lra.
Qed.
