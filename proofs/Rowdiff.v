(* The max row-diff lemmas (spec/rules.md section "Max row-diff lemmas",
   checker/rules/rowdiff.py): Lemma 20, the recursive step of Lemma 22 /
   Theorem 23, and Theorems 24-26 (any summary vector).  "range(x) <= r" is
   stated as: every difference x_i - x_j (i, j < c) is <= r, which is
   equivalent to max x - min x <= r.  Only the standard library. *)
From Coq Require Import Reals Lra Lia.
From MaxK Require Import Sums.
Open Scope R_scope.

Definition range_le (x : nat -> R) (c : nat) (r : R) : Prop :=
  forall i j, (i < c)%nat -> (j < c)%nat -> x i - x j <= r.

(* the row vector a B, B with rows k < h *)
Definition vecmat (a : nat -> R) (B : nat -> nat -> R) (h : nat) : nat -> R :=
  fun o => sumR (fun k => a k * B k o) h.

(** Lemma 20 (vector-matrix): range(a B) <= sum_k |a_k| range(B_k). *)
Theorem lemma20 : forall a B h c t,
  (forall k, (k < h)%nat -> range_le (B k) c (t k)) ->
  range_le (vecmat a B h) c (sumR (fun k => Rabs (a k) * t k) h).
Proof.
  intros a B h c t Ht i j Hi Hj. unfold vecmat. rewrite <- sumR_minus.
  apply sumR_le. intros k Hk.
  assert (H1 := Ht k Hk i j Hi Hj). assert (H2 := Ht k Hk j i Hj Hi).
  replace (a k * B k i - a k * B k j) with (a k * (B k i - B k j)) by ring.
  destruct (Rle_dec 0 (a k)).
  - rewrite Rabs_right by lra. apply Rmult_le_compat_l; lra.
  - rewrite Rabs_left by lra. nra.
Qed.

(** Theorem 21: the same for each row of a matrix product A B. *)
Corollary thm21 : forall (A B : nat -> nat -> R) h c t r,
  (forall k, (k < h)%nat -> range_le (B k) c (t k)) ->
  range_le (vecmat (A r) B h) c (sumR (fun k => Rabs (A r k) * t k) h).
Proof. intros; apply lemma20; assumption. Qed.

(** Lemma 22 / Theorem 23, the recursive step: if the rows of
    M = B_{p+1} ... B_n have ranges <= t_{p+1}, then row k of B_p M has range
    <= t_p[k] = sum_j |B_p[k,j]| t_{p+1}[j]; and the bound is monotone in
    t_{p+1} (so upper bounds of the ranges may be used). *)
Corollary lemma22_step : forall (Bp M : nat -> nat -> R) h c t k,
  (forall j, (j < h)%nat -> range_le (M j) c (t j)) ->
  range_le (vecmat (Bp k) M h) c (sumR (fun j => Rabs (Bp k j) * t j) h).
Proof. intros; apply lemma20; assumption. Qed.

Lemma lemma22_monotone : forall (a t t' : nat -> R) h,
  (forall j, (j < h)%nat -> t j <= t' j) ->
  sumR (fun j => Rabs (a j) * t j) h <= sumR (fun j => Rabs (a j) * t' j) h.
Proof.
  intros a t t' h H. apply sumR_le. intros j Hj.
  apply Rmult_le_compat_l; [apply Rabs_pos | apply H; assumption].
Qed.

Lemma range_le_plus : forall x y c rx ry,
  range_le x c rx -> range_le y c ry -> range_le (fun o => x o + y o) c (rx + ry).
Proof. intros x y c rx ry Hx Hy i j Hi Hj. specialize (Hx i j Hi Hj). specialize (Hy i j Hi Hj). lra. Qed.

(** Theorems 24-26 (any summary h_v): range(x M) <= range(h_v M) + sum_k |x_k - h_v k| t[k]. *)
Theorem thm24 : forall (x hv : nat -> R) (M : nat -> nat -> R) h c t Rh,
  (forall k, (k < h)%nat -> range_le (M k) c (t k)) ->
  range_le (vecmat hv M h) c Rh ->
  range_le (vecmat x M h) c (Rh + sumR (fun k => Rabs (x k - hv k) * t k) h).
Proof.
  intros x hv M h c t Rh Ht Hh i j Hi Hj.
  assert (E : forall o, vecmat x M h o = vecmat hv M h o + vecmat (fun k => x k - hv k) M h o).
  { intros o. unfold vecmat. rewrite <- sumR_plus. apply sumR_ext. intros; ring. }
  rewrite !E. apply (range_le_plus _ _ c); [assumption | apply lemma20; assumption | |]; assumption.
Qed.
