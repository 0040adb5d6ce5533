(* Low-rank EQKE (spec/rules.md section "Low-rank EQKE",
   checker/rules/subcubic_attention.py): Lemma L (the enclosure, err = cs),
   with Cauchy-Schwarz and the Frobenius bound in the form the checker uses
   them (norms as numbers whose squares bound the sums of squares), and the
   one-sided row bound of Lemmas L' and R.  Only the standard library. *)
From Coq Require Import Reals Lra Lia.
From MaxK Require Import Sums.
Open Scope R_scope.

Definition dot (x y : nat -> R) (h : nat) : R := sumR (fun j => x j * y j) h.
Definition sq (x : nat -> R) (h : nat) : R := sumR (fun j => x j * x j) h.

Lemma sumR_swap : forall (f : nat -> nat -> R) n m,
  sumR (fun i => sumR (fun j => f i j) m) n = sumR (fun j => sumR (fun i => f i j) n) m.
Proof.
  intros f n m; induction n; simpl.
  - induction m; simpl; [reflexivity|]. rewrite <- IHm. lra.
  - rewrite IHn, <- sumR_plus. reflexivity.
Qed.

Lemma sq_nonneg : forall x h, 0 <= sq x h.
Proof. intros; apply sumR_nonneg; intros; apply Rle_0_sqr. Qed.

Lemma sumR_square_expand : forall (a b : nat -> R) x y h,
  sumR (fun i => (x * b i - y * a i) * (x * b i - y * a i)) h
  = x * x * sq b h + y * y * sq a h - 2 * x * y * dot a b h.
Proof. intros; unfold sq, dot; induction h; simpl; [ring|]. rewrite IHh; ring. Qed.

(** Cauchy-Schwarz for finite sums. *)
Theorem cauchy_schwarz : forall a b h, dot a b h * dot a b h <= sq a h * sq b h.
Proof.
  intros a b h; induction h as [|h IH]; [unfold dot, sq; simpl; lra|].
  assert (H := sumR_nonneg (fun i => (a h * b i - b h * a i) * (a h * b i - b h * a i)) h
                 ltac:(intros; cbv beta; apply Rle_0_sqr)).
  rewrite sumR_square_expand in H. unfold dot, sq in *. simpl. nra.
Qed.

(** ... in the checker's form: x >= 0 with x^2 >= |a|^2 (an upper bound of
    the norm confirmed by squaring), likewise y; then |a . b| <= x y. *)
Theorem cs_bound : forall a b h x y, 0 <= x -> 0 <= y ->
  sq a h <= x * x -> sq b h <= y * y -> Rabs (dot a b h) <= x * y.
Proof.
  intros a b h x y Hx Hy Ha Hb.
  assert (Hcs := cauchy_schwarz a b h). assert (Hsa := sq_nonneg a h). assert (Hsb := sq_nonneg b h).
  assert (H2 : dot a b h * dot a b h <= (x * y) * (x * y)).
  { apply Rle_trans with (sq a h * sq b h); [assumption|].
    replace ((x * y) * (x * y)) with ((x * x) * (y * y)) by ring.
    apply Rmult_le_compat; assumption. }
  assert (0 <= x * y) by (apply Rmult_le_pos; assumption).
  destruct (Rcase_abs (dot a b h)) as [Hn|Hp].
  - rewrite Rabs_left by assumption. nra.
  - rewrite Rabs_right by assumption. nra.
Qed.

(* x D y = sum_k (x D)_k y_k, (x D)_k = sum_j x_j D_jk *)
Definition rowmat (x : nat -> R) (D : nat -> nat -> R) (h : nat) : nat -> R :=
  fun k => sumR (fun j => x j * D j k) h.
Definition frob (D : nat -> nat -> R) (h : nat) : R := sumR (fun j => sq (D j) h) h.

(** |x D y| <= |x| |D|_F |y|, with the norms as checked upper bounds. *)
Theorem frobenius_bound : forall x D y h nx nD ny,
  0 <= nx -> 0 <= nD -> 0 <= ny ->
  sq x h <= nx * nx -> frob D h <= nD * nD -> sq y h <= ny * ny ->
  Rabs (dot (rowmat x D h) y h) <= (nx * nD) * ny.
Proof.
  intros x D y h nx nD ny Hx HD Hy Hsx HsD Hsy.
  apply cs_bound; try assumption; [apply Rmult_le_pos; assumption|].
  (* |x D|^2 = sum_k (sum_j x_j D_jk)^2 <= sum_k |x|^2 sum_j D_jk^2 = |x|^2 |D|_F^2 *)
  apply Rle_trans with (sq x h * frob D h).
  - assert (E : frob D h = sumR (fun k => sq (fun j => D j k) h) h)
      by (unfold frob, sq; apply sumR_swap).
    rewrite E, <- sumR_scal_l. unfold sq at 1. apply sumR_le. intros k Hk.
    exact (cauchy_schwarz x (fun j => D j k) h).
  - replace ((nx * nD) * (nx * nD)) with ((nx * nx) * (nD * nD)) by ring.
    apply Rmult_le_compat; [apply sq_nonneg | apply sumR_nonneg; intros; apply sq_nonneg
                            | assumption | assumption].
Qed.

(** Lemma L.  With Q_q, K_t rows of width h, A, B (h x r), G, H (h x h) any
    reals, D = I - A B^T - G H^T (computed by the checker), c any vector and
    c_q = (QG)_q . c: for the checker's x_q, y_t, n_q = s1 s2, k_t (numbers
    whose squares bound |(QG)_q|^2, |(KH)_t - c|^2, |Q_q|^2 and |D|_F^2, |K_t|^2),
    |Q_q . K_t - c_q - L[q,t]| <= x_q y_t + n_q k_t,  L = (QA)_q . (KB)_t. *)
Section LemmaL.
Variable h r : nat.
Variables Qq Kt cv : nat -> R.
Variables A B G H : nat -> nat -> R.

Definition QA : nat -> R := rowmat Qq A h.
Definition KB : nat -> R := rowmat Kt B h.
Definition QG : nat -> R := rowmat Qq G h.
Definition KH : nat -> R := rowmat Kt H h.
Definition Dm (j l : nat) : R :=
  (if (j =? l)%nat then 1 else 0) - sumR (fun p => A j p * B l p) r - sumR (fun p => G j p * H l p) h.

(* a bilinear form x M y as a double sum *)
Definition bil (x : nat -> R) (M : nat -> nat -> R) (y : nat -> R) : R :=
  sumR (fun j => sumR (fun l => x j * M j l * y l) h) h.

Lemma bil_rowmat : forall x M y, bil x M y = dot (rowmat x M h) y h.
Proof.
  intros. unfold bil, dot, rowmat.
  rewrite sumR_swap. apply sumR_ext. intros l _. rewrite <- sumR_scal_r.
  apply sumR_ext. intros; ring.
Qed.

Lemma bil_factored : forall x y (U V : nat -> nat -> R) s,
  bil x (fun j l => sumR (fun p => U j p * V l p) s) y
  = dot (rowmat x U h) (rowmat y V h) s.
Proof.
  intros x y U V s. unfold bil, dot, rowmat.
  rewrite (sumR_ext _ (fun j => sumR (fun p => sumR (fun l => x j * U j p * (V l p * y l)) h) s)).
  2: { intros j _. rewrite <- sumR_swap. apply sumR_ext. intros l _.
       rewrite <- sumR_scal_l, <- sumR_scal_r. apply sumR_ext. intros; ring. }
  rewrite sumR_swap. apply sumR_ext. intros p _.
  rewrite <- sumR_scal_r. apply sumR_ext. intros j _.
  rewrite <- sumR_scal_l. apply sumR_ext. intros; ring.
Qed.

Lemma bil_identity : forall x y, bil x (fun j l => if (j =? l)%nat then 1 else 0) y = dot x y h.
Proof.
  intros x y. unfold bil, dot. apply sumR_ext. intros j Hj.
  assert (E : forall n, (j < n)%nat -> sumR (fun l => x j * (if (j =? l)%nat then 1 else 0) * y l) n
                                      = x j * y j).
  { intros n; induction n; intros Hn; [lia|]. simpl.
    destruct (Nat.eqb_spec j n) as [->|Hne].
    - assert (Z : sumR (fun l => x n * (if (n =? l)%nat then 1 else 0) * y l) n = 0).
      { clear. assert (forall m, (m <= n)%nat ->
          sumR (fun l => x n * (if (n =? l)%nat then 1 else 0) * y l) m = 0); [|apply H; lia].
        intros m; induction m; intros Hm; simpl; [reflexivity|].
        destruct (Nat.eqb_spec n m); [lia|]. rewrite IHm by lia. ring. }
      rewrite Z. ring.
    - rewrite IHn by lia. ring. }
  apply E; assumption.
Qed.

Lemma bil_linear : forall x y (M1 M2 M3 : nat -> nat -> R),
  bil x (fun j l => M1 j l - M2 j l - M3 j l) y = bil x M1 y - bil x M2 y - bil x M3 y.
Proof.
  intros. unfold bil. rewrite <- !sumR_minus. apply sumR_ext. intros.
  rewrite <- !sumR_minus. apply sumR_ext. intros. ring.
Qed.

(** The identity of Lemma L's proof: Q_q . K_t = L + (QG)_q . (KH)_t + Q_q D K_t. *)
Theorem lemmaL_identity :
  dot Qq Kt h = dot QA KB r + dot QG KH h + dot (rowmat Qq Dm h) Kt h.
Proof.
  rewrite <- bil_rowmat. unfold Dm. rewrite bil_linear, bil_identity.
  unfold QA, KB, QG, KH. rewrite !bil_factored. ring.
Qed.

Theorem lemmaL : forall xq yt nq kt s1 s2,
  0 <= xq -> 0 <= yt -> 0 <= s1 -> 0 <= s2 -> 0 <= kt -> nq = s1 * s2 ->
  sq QG h <= xq * xq -> sq (fun l => KH l - cv l) h <= yt * yt ->
  sq Qq h <= s1 * s1 -> frob Dm h <= s2 * s2 -> sq Kt h <= kt * kt ->
  Rabs (dot Qq Kt h - dot QG cv h - dot QA KB r) <= xq * yt + nq * kt.
Proof.
  intros xq yt nq kt s1 s2 Hx Hy H1 H2 Hk -> HQG HKH HQ HD HK.
  rewrite lemmaL_identity.
  replace (dot QA KB r + dot QG KH h + dot (rowmat Qq Dm h) Kt h - dot QG cv h - dot QA KB r)
    with (dot QG (fun l => KH l - cv l) h + dot (rowmat Qq Dm h) Kt h).
  2: { unfold dot. rewrite (sumR_ext (fun j => QG j * (KH j - cv j))
                                       (fun j => QG j * KH j - QG j * cv j)) by (intros; ring).
       rewrite sumR_minus. ring. }
  eapply Rle_trans; [apply Rabs_triang|]. apply Rplus_le_compat.
  - apply cs_bound; assumption.
  - apply frobenius_bound; assumption.
Qed.
(** Lemma R's identity: with E = I - A B^T, Q_q . K_t = L + Q_q E K_t. *)
Definition Em (j l : nat) : R := (if (j =? l)%nat then 1 else 0) - sumR (fun p => A j p * B l p) r.

Lemma bil_linear2 : forall x y (M1 M2 : nat -> nat -> R),
  bil x (fun j l => M1 j l - M2 j l) y = bil x M1 y - bil x M2 y.
Proof.
  intros. unfold bil. rewrite <- !sumR_minus. apply sumR_ext. intros.
  rewrite <- !sumR_minus. apply sumR_ext. intros. ring.
Qed.

Theorem lemmaR_identity : dot Qq Kt h = dot QA KB r + dot (rowmat Qq Em h) Kt h.
Proof.
  rewrite <- bil_rowmat. unfold Em. rewrite bil_linear2, bil_identity.
  unfold QA, KB. rewrite bil_factored. ring.
Qed.
End LemmaL.

(** Lemmas L' and R, the one-sided step: for a row y of c entries and
    c_q = min_t y_t, every y_t - c_q lies in [0, delta] when delta bounds the
    row's range (every difference). *)
Theorem row_minus_min : forall (y : nat -> R) (c : nat) (cq delta : R),
  (exists t0, (t0 < c)%nat /\ cq = y t0) ->
  (forall t, (t < c)%nat -> cq <= y t) ->
  (forall i j, (i < c)%nat -> (j < c)%nat -> y i - y j <= delta) ->
  forall t, (t < c)%nat -> 0 <= y t - cq <= delta.
Proof.
  intros y c cq delta [t0 [Ht0 ->]] Hmin Hr t Ht. split.
  - specialize (Hmin t Ht). lra.
  - apply Hr; assumption.
Qed.
