(* Rule subcubic_gap (spec/rules.md section "Rule subcubic_gap",
   checker/rules/subcubic_gap.py): the count C(k-1,c)(m-g+1)^c, Lemma S
   (per-query shift), and Lemmas 5-7 (direct = max_diff, mean+diff, min).
   Only the standard library. *)
From Coq Require Import Reals Lra Lia List Bool Arith.
From MaxK Require Import Sums Softmax Counting Classes Cubic.
Import ListNotations.
Open Scope R_scope.

(* ------------------------------------------------------------------------ *)
(* The count                                                                 *)

(* the tokens a gap g allows: 0, 1, ..., m - g *)
Definition gap_tokens (m g : nat) : list nat := seq 0 (m - g + 1).

Lemma gap_tokens_length : forall m g, length (gap_tokens m g) = (m - g + 1)%nat.
Proof. intros; apply seq_length. Qed.

(* The paper's compatibility test m - t >= g allows exactly these tokens. *)
Lemma gap_tokens_spec : forall m g u, (1 <= g <= m)%nat -> (u <= m)%nat ->
  (In u (gap_tokens m g) <-> (g <= m - u)%nat).
Proof. intros m g u Hg Hu. unfold gap_tokens. rewrite in_seq. lia. Qed.

(** The class of (m, q, c, g) has C(k-1, c) (m - g + 1)^c sequences. *)
Theorem gap_class_count : forall v n q m c g,
  (1 <= n)%nat -> (q <= m)%nat -> (m < v)%nat -> (c <= cmax q m n)%nat -> (1 <= g <= m)%nat ->
  length (filter (fun t => cls_is q m c t && covered m (gap_tokens m g) (tl t)) (seqs v (S n)))
  = (choose n c * (m - g + 1) ^ c)%nat.
Proof.
  intros v n q m c g Hn Hqm Hmv Hc Hg.
  rewrite class_cover_size; auto.
  - rewrite gap_tokens_length. reflexivity.
  - apply seq_NoDup.
  - intros u Hu. unfold gap_tokens in Hu. apply in_seq in Hu. lia.
Qed.

(* The hints: gap q m c = Some g for a confirmed entry (m, q, c, g, h). *)
Definition gap_good (gap : nat -> nat -> nat -> option nat) (q m c : nat) : list nat :=
  match c, gap q m c with
  | O, _ => []                        (* c = 0: flag only (gap_z) *)
  | S _, Some g => gap_tokens m g
  | S _, None => []
  end.
Definition gap_z (gap : nat -> nat -> nat -> option nat) (q m : nat) : bool :=
  match gap q m 0%nat with Some _ => true | None => false end.

(** Theorem (subcubic_gap), the count: the sequences covered by the
    confirmed entries number  sum_{confirmed (m,q,c)} C(k-1,c)(m-g+1)^c  (c = 0: 1);
    the classes of distinct (m, q, c) are disjoint. *)
Theorem subcubic_count : forall v n gap, (1 <= n)%nat ->
  (forall q m c g, (1 <= c)%nat -> gap q m c = Some g -> (1 <= g <= m)%nat) ->
  length (filter (cover_pred (gap_good gap) (gap_z gap)) (seqs v (S n)))
  = list_sum (map (fun m =>
      list_sum (map (fun q =>
        list_sum (map (fun c =>
          match gap q m c with
          | None => 0%nat
          | Some g => if (c =? 0)%nat then 1%nat else (choose n c * (m - g + 1) ^ c)%nat
          end)
          (seq 0 (S (cmax q m n)))))
        (seq 0 (S m))))
      (seq 0 v)).
Proof.
  intros v n gap Hn Hg. rewrite cubic_count; auto.
  - unfold cubic_N. f_equal. apply map_ext. intros m. f_equal. apply map_ext. intros q.
    f_equal. apply map_ext. intros c. unfold gap_z, gap_good.
    destruct (Nat.eqb_spec c 0) as [->|Hc]; [destruct (gap q m 0%nat); reflexivity|].
    destruct c as [|c]; [lia|]. destruct (gap q m (S c)) as [g|].
    + rewrite gap_tokens_length. reflexivity.
    + simpl. lia.
  - intros q m c. unfold gap_good. destruct c; [constructor|].
    destruct (gap q m (S c)); [apply seq_NoDup | constructor].
  - intros q m c u. unfold gap_good. destruct c as [|c]; [intros []|].
    destruct (gap q m (S c)) as [g|] eqn:E; [|intros []].
    intros Hu. unfold gap_tokens in Hu. apply in_seq in Hu.
    specialize (Hg q m (S c) g ltac:(lia) E). lia.
Qed.

(* ------------------------------------------------------------------------ *)
(* Lemma S (per-query shift)                                                 *)

(** Replacing EQKE[q, .] by EQKE[q, .] - c_q multiplies every weight of a
    sequence with query q by exp(-c_q) > 0, so the sign of
    sum_i w_i x_i(o) is unchanged. *)
Theorem lemma_S : forall (EQKE EQKP : nat -> nat -> R) (cq : R) (q : nat)
                         (tok : nat -> nat) (x : nat -> R) (k : nat),
  sumR (fun i => (exp (EQKE q (tok i) - cq) * exp (EQKP q i)) * x i) k < 0
  <-> sumR (fun i => (exp (EQKE q (tok i)) * exp (EQKP q i)) * x i) k < 0.
Proof.
  intros EQKE EQKP cq q tok x k.
  rewrite (sumR_ext (fun i => (exp (EQKE q (tok i) - cq) * exp (EQKP q i)) * x i)
                    (fun i => (exp (- cq) * (exp (EQKE q (tok i)) * exp (EQKP q i))) * x i)).
  - apply scale_sign, exp_pos.
  - intros i _. unfold Rminus. rewrite exp_plus. ring.
Qed.

(* ------------------------------------------------------------------------ *)
(* Lemmas 5-7 for one query q and max m.  Lemma 5 is split in two: the      *)
(* per-position coefficient bounds (coeffs_max_diff, coeffs_mean_diff,      *)
(* coeffs_min: the three `direct` options), and the weighted sum they give  *)
(* (lemma5).                                                                 *)

Section GapLemmas.

Variable v n : nat.
Variable q m : nat.
Variable beta : nat -> R.       (* beta i = exp(EQKP[q, i]), i < n *)
Variable bq : R.                (* beta_{k-1} *)
Variable e : nat -> R.          (* e t = exp(EQKE[q, t]) (or any positive reals: Lemma S) *)
Variable EU : nat -> R.         (* row q of EU *)
Variable EVOU PVOU : nat -> nat -> R.
Variable rho : nat -> R.        (* the checker's rho[t][m] *)
Variable aM aQ aP : R.          (* the checker's alpha_M, alpha_Q, alpha_P *)

Hypothesis beta_pos : forall i, (i < n)%nat -> 0 < beta i.
Hypothesis bq_pos : 0 < bq.
Hypothesis e_pos : forall t, 0 < e t.

Definition xg (i u o : nat) : R := (EU o - EU m) + (EVOU u o - EVOU u m) + (PVOU i o - PVOU i m).

(* the coefficients bound each position's x_i(o), for every o <> m *)
Hypothesis aM_ge : forall i o, (i < n)%nat -> o <> m -> xg i m o <= aM.
Hypothesis aQ_ge : forall o, o <> m -> xg n q o <= aQ.
Hypothesis aP_ge : forall i t o, (i < n)%nat -> t <> m -> o <> m -> xg i t o <= aP + rho t.

Definition Bg : R := sumR beta n.
Definition SPg (tok : nat -> nat) : R := sumR (fun i => if (tok i =? m)%nat then 0 else beta i) n.
Definition SigmaG (tok : nat -> nat) (o : nat) : R :=
  sumR (fun i => beta i * e (tok i) * xg i (tok i) o) n + bq * e q * xg n q o.

(** Lemma 5 (one coefficient per position). *)
Lemma lemma5 : forall tok o, o <> m ->
  SigmaG tok o <=
  sumR (fun i => if (tok i =? m)%nat then beta i * e m * aM
                 else beta i * e (tok i) * (aP + rho (tok i))) n + bq * e q * aQ.
Proof.
  intros tok o Ho. unfold SigmaG. apply Rplus_le_compat.
  - apply sumR_le. intros i Hi. assert (0 < beta i * e (tok i)) by
      (apply Rmult_lt_0_compat; [apply beta_pos; assumption | apply e_pos]).
    destruct ((tok i =? m)%nat) eqn:E.
    + apply Nat.eqb_eq in E. rewrite E in *.
      apply Rmult_le_compat_l; [lra | apply aM_ge; assumption].
    + apply Nat.eqb_neq in E.
      apply Rmult_le_compat_l; [lra | apply aP_ge; assumption].
  - assert (0 < bq * e q) by (apply Rmult_lt_0_compat; [assumption | apply e_pos]).
    apply Rmult_le_compat_l; [lra | apply aQ_ge; assumption].
Qed.

(** Lemma 6 (the gap and the near band): every token t <= m - g has
    e_t (aP + rho t) <= mu, given the checker's near-band products
    (m - h < u <= m - g) and, when m - h >= 0, its far bound: a >= aP + rho t
    for t <= m - h (a = up_add(aP, rho_pre[m-h][m])), e_lo <= e t <= e_hi for
    t <= m - h (exps of the prefix extremes of EQKE[q]), and
    E_hat * a <= mu with E_hat = e_lo if a < 0, e_hi otherwise
    (_Tables.e_pre_times). *)
Lemma lemma6 : forall g h mu a e_lo e_hi,
  (forall u, (m + 1 <= u + h)%nat -> (u + g <= m)%nat -> e u * (aP + rho u) <= mu) ->
  ((h <= m)%nat ->
     (forall t, (t + h <= m)%nat -> aP + rho t <= a /\ e_lo <= e t <= e_hi) /\
     (if Rlt_dec a 0 then e_lo else e_hi) * a <= mu) ->
  forall t, (t + g <= m)%nat -> e t * (aP + rho t) <= mu.
Proof.
  intros g h mu a elo ehi Hnear Hfar t Ht.
  destruct (le_lt_dec (m + 1) (t + h)) as [Hn|Hf]; [apply Hnear; assumption|].
  destruct (Hfar ltac:(lia)) as [Hb Hmu]. destruct (Hb t ltac:(lia)) as [Hr [He1 He2]].
  assert (He := e_pos t).
  assert (e t * (aP + rho t) <= e t * a) by (apply Rmult_le_compat_l; lra).
  destruct (Rlt_dec a 0).
  - assert (e t * a <= elo * a) by nra. lra.
  - assert (e t * a <= ehi * a) by nra. lra.
Qed.

(** The affine tail both per-sequence steps share (Lemma 7): a bound Y of
    lemma 5's sum by sum_i (beta_i e_m aM if tok i = m, beta_i mu otherwise) + w
    is affine in S_P, so f(S) = (B - S) e_m aM + bq e_q aQ + S mu + w < 0 at both
    placement extremes S_lo <= S_P <= S_hi makes Y + bq e_q aQ negative. *)
Lemma affine_tail : forall tok mu w Slo Shi Y,
  Y <= sumR (fun i => if (tok i =? m)%nat then beta i * e m * aM else beta i * mu) n + w ->
  Slo <= SPg tok <= Shi ->
  (Bg - Slo) * e m * aM + bq * e q * aQ + Slo * mu + w < 0 ->
  (Bg - Shi) * e m * aM + bq * e q * aQ + Shi * mu + w < 0 ->
  Y + bq * e q * aQ < 0.
Proof.
  intros tok mu w Slo Shi Y Hle HS Hlo Hhi.
  rewrite (sumR_if (fun i => (tok i =? m)%nat) (fun i => beta i * e m * aM) (fun i => beta i * mu))
    in Hle.
  rewrite (sumR_ext (fun i => if (tok i =? m)%nat then 0 else beta i * mu)
                    (fun i => (if (tok i =? m)%nat then 0 else beta i) * mu)) in Hle
    by (intros; destruct (_ =? _)%nat; ring).
  rewrite (sumR_ext (fun i => if (tok i =? m)%nat then beta i * e m * aM else 0)
                    (fun i => (beta i - (if (tok i =? m)%nat then 0 else beta i)) * (e m * aM)))
    in Hle by (intros; destruct (_ =? _)%nat; ring).
  rewrite sumR_scal_r, sumR_scal_r, sumR_minus in Hle. fold (SPg tok) in Hle. fold Bg in Hle.
  set (a := Bg * e m * aM + bq * e q * aQ + w). set (b := mu - e m * aM).
  assert (Hf : forall S, (Bg - S) * e m * aM + bq * e q * aQ + S * mu + w = a + b * S)
    by (intros; unfold a, b; ring).
  rewrite Hf in Hlo, Hhi.
  assert (a + b * SPg tok < 0) by (apply (affine_neg_at_ends a b Slo Shi); assumption).
  unfold a, b in *. nra.
Qed.

(** Lemma 7 and the theorem's per-sequence step: with every non-query token
    m or <= m - g (so each non-max term is <= beta_i mu), S_lo <= S_P <= S_hi
    and f(S) = (B - S) e_m aM + bq e_q aQ + S mu < 0 at both ends, the
    sequence's sign-form sum is negative for every o <> m. *)
Theorem subcubic_class_sound : forall tok g mu Slo Shi,
  (forall i, (i < n)%nat -> tok i = m \/ (tok i + g <= m)%nat) ->
  (forall t, (t + g <= m)%nat -> e t * (aP + rho t) <= mu) ->
  Slo <= SPg tok <= Shi ->
  (Bg - Slo) * e m * aM + bq * e q * aQ + Slo * mu < 0 ->
  (Bg - Shi) * e m * aM + bq * e q * aQ + Shi * mu < 0 ->
  forall o, o <> m -> SigmaG tok o < 0.
Proof.
  intros tok g mu Slo Shi Htok Hmu HS Hlo Hhi o Ho.
  eapply Rle_lt_trans; [apply lemma5; assumption|].
  apply (affine_tail tok mu 0 Slo Shi); [| assumption | lra | lra].
  rewrite Rplus_0_r.
  apply sumR_le. intros i Hi. destruct ((tok i =? m)%nat) eqn:E; [lra|].
  apply Nat.eqb_neq in E. destruct (Htok i Hi) as [|Hg]; [contradiction|].
  specialize (Hmu _ Hg).
  rewrite Rmult_assoc. apply Rmult_le_compat_l; [left; apply beta_pos; assumption | assumption].
Qed.

(* a sum that is zero except at one position j < n *)
Lemma sumR_at : forall (j : nat) (x : R) len, (j < len)%nat ->
  sumR (fun i => if (i =? j)%nat then x else 0) len = x.
Proof.
  intros j x len Hj. induction len as [|len IH]; [lia|]. simpl.
  destruct (Nat.eqb_spec len j) as [->|Hne].
  - assert (Hz : sumR (fun i => if (i =? j)%nat then x else 0) j = 0).
    { clear IH Hj. assert (Hgen : forall p, (p <= j)%nat ->
        sumR (fun i => if (i =? j)%nat then x else 0) p = 0).
      { induction p as [|p IHp]; intros Hp; simpl; [reflexivity|].
        destruct (Nat.eqb_spec p j); [lia|]. rewrite IHp by lia. lra. }
      apply Hgen; lia. }
    rewrite Hz. lra.
  - rewrite IH by lia. lra.
Qed.

(** Lemma 6b (two-gap entries) and its per-sequence step: every non-query
    token is m or <= m - g, and every one but the token at a position j holding
    a non-max token is m or <= m - g2 (so "at most one token above m - g2", with
    c >= 1: j is that token's position, or any non-max position if there is
    none); mu1 bounds the tokens <= m - g, mu2 those <= m - g2, wd >= beta_i
    (mu1 - mu2) for every i (the checker's w_delta); then f2(S) + wd < 0 at both
    placement extremes gives the sign form for every o <> m. *)
Theorem subcubic_two_gap_sound : forall tok g g2 j mu1 mu2 wd Slo Shi,
  (forall i, (i < n)%nat -> tok i = m \/ (tok i + g <= m)%nat) ->
  (j < n)%nat -> tok j <> m ->
  (forall i, (i < n)%nat -> i <> j -> tok i = m \/ (tok i + g2 <= m)%nat) ->
  (forall t, (t + g <= m)%nat -> e t * (aP + rho t) <= mu1) ->
  (forall t, (t + g2 <= m)%nat -> e t * (aP + rho t) <= mu2) ->
  (forall i, (i < n)%nat -> beta i * (mu1 - mu2) <= wd) ->
  Slo <= SPg tok <= Shi ->
  (Bg - Slo) * e m * aM + bq * e q * aQ + Slo * mu2 + wd < 0 ->
  (Bg - Shi) * e m * aM + bq * e q * aQ + Shi * mu2 + wd < 0 ->
  forall o, o <> m -> SigmaG tok o < 0.
Proof.
  intros tok g g2 j mu1 mu2 wd Slo Shi Htok Hj Hjm Htok2 Hmu1 Hmu2 Hwd HS Hlo Hhi o Ho.
  eapply Rle_lt_trans; [apply lemma5; assumption|].
  assert (Hle : sumR (fun i => if (tok i =? m)%nat then beta i * e m * aM
                               else beta i * e (tok i) * (aP + rho (tok i))) n
                <= sumR (fun i => (if (tok i =? m)%nat then beta i * e m * aM
                                   else beta i * mu2)
                                  + (if (i =? j)%nat then beta j * (mu1 - mu2) else 0)) n).
  { apply sumR_le. intros i Hi. assert (Hb := beta_pos i Hi).
    destruct ((tok i =? m)%nat) eqn:E.
    - apply Nat.eqb_eq in E. destruct (Nat.eqb_spec i j) as [->|]; [contradiction|lra].
    - apply Nat.eqb_neq in E. destruct (Nat.eqb_spec i j) as [->|Hne].
      + destruct (Htok j Hj) as [|Hg]; [contradiction|]. specialize (Hmu1 _ Hg).
        assert (beta j * e (tok j) * (aP + rho (tok j)) <= beta j * mu1)
          by (rewrite Rmult_assoc; apply Rmult_le_compat_l; lra). lra.
      + destruct (Htok2 i Hi Hne) as [|Hg]; [contradiction|]. specialize (Hmu2 _ Hg).
        assert (beta i * e (tok i) * (aP + rho (tok i)) <= beta i * mu2)
          by (rewrite Rmult_assoc; apply Rmult_le_compat_l; lra). lra. }
  rewrite sumR_plus, sumR_at in Hle by assumption.
  assert (Hj2 := Hwd j Hj).
  apply (affine_tail tok mu2 wd Slo Shi); [lra | assumption | assumption | assumption].
Qed.

End GapLemmas.

(** Lemma 5's coefficients, direct = "max_diff": U >= EU[q,o] - EU[q,m],
    rho t >= EVOU[t,o] - EVOU[t,m], Pn, Pq >= the positional differences
    (every o <> m); alpha_M = U + rho m + Pn, alpha_Q = U + rho q + Pq,
    alpha_P = U + Pn. *)
Lemma coeffs_max_diff : forall n q m (EU : nat -> R) (EVOU PVOU : nat -> nat -> R)
                               (rho : nat -> R) U Pn Pq,
  (forall o, o <> m -> EU o - EU m <= U) ->
  (forall t o, o <> m -> EVOU t o - EVOU t m <= rho t) ->
  (forall i o, (i < n)%nat -> o <> m -> PVOU i o - PVOU i m <= Pn) ->
  (forall o, o <> m -> PVOU n o - PVOU n m <= Pq) ->
  (forall i o, (i < n)%nat -> o <> m -> xg m EU EVOU PVOU i m o <= U + rho m + Pn) /\
  (forall o, o <> m -> xg m EU EVOU PVOU n q o <= U + rho q + Pq) /\
  (forall i t o, (i < n)%nat -> t <> m -> o <> m -> xg m EU EVOU PVOU i t o <= (U + Pn) + rho t).
Proof.
  intros n q m EU EVOU PVOU rho U Pn Pq HU Hr HPn HPq. unfold xg. repeat split.
  - intros i o Hi Ho. specialize (HU o Ho). specialize (Hr m o Ho). specialize (HPn i o Hi Ho). lra.
  - intros o Ho. specialize (HU o Ho). specialize (Hr q o Ho). specialize (HPq o Ho). lra.
  - intros i t o Hi Ht Ho. specialize (HU o Ho). specialize (Hr t o Ho). specialize (HPn i o Hi Ho).
    lra.
Qed.

(** direct = "mean+diff": for any row vector Ebar (the column means, or any
    real vector in their enclosure) and R = EU - Ebar:
    C >= Ebar[o] - Ebar[m] + EVOU[m,o] - EVOU[m,m], Ebm >= Ebar[o] - Ebar[m],
    N >= R[o] - R[m]; alpha_M = C + N + Pn, alpha_Q = Ebm + rho q + N + Pq
    (C + N + Pq when q = m), alpha_P = Ebm + N + Pn. *)
Lemma coeffs_mean_diff : forall n q m (EU Ebar : nat -> R) (EVOU PVOU : nat -> nat -> R)
                                (rho : nat -> R) C Ebm N Pn Pq,
  (forall o, o <> m -> Ebar o - Ebar m + (EVOU m o - EVOU m m) <= C) ->
  (forall o, o <> m -> Ebar o - Ebar m <= Ebm) ->
  (forall o, o <> m -> (EU o - Ebar o) - (EU m - Ebar m) <= N) ->
  (forall t o, o <> m -> EVOU t o - EVOU t m <= rho t) ->
  (forall i o, (i < n)%nat -> o <> m -> PVOU i o - PVOU i m <= Pn) ->
  (forall o, o <> m -> PVOU n o - PVOU n m <= Pq) ->
  (forall i o, (i < n)%nat -> o <> m -> xg m EU EVOU PVOU i m o <= C + N + Pn) /\
  (forall o, o <> m -> xg m EU EVOU PVOU n q o
                       <= (if (q =? m)%nat then C else Ebm + rho q) + N + Pq) /\
  (forall i t o, (i < n)%nat -> t <> m -> o <> m ->
     xg m EU EVOU PVOU i t o <= (Ebm + N + Pn) + rho t).
Proof.
  intros n q m EU Ebar EVOU PVOU rho C Ebm N Pn Pq HC HE HN Hr HPn HPq. unfold xg. repeat split.
  - intros i o Hi Ho. specialize (HC o Ho). specialize (HN o Ho). specialize (HPn i o Hi Ho). lra.
  - intros o Ho. specialize (HN o Ho). specialize (HPq o Ho).
    destruct (Nat.eqb_spec q m) as [->|Hq].
    + specialize (HC o Ho). lra.
    + specialize (HE o Ho). specialize (Hr q o Ho). lra.
  - intros i t o Hi Ht Ho. specialize (HE o Ho). specialize (HN o Ho). specialize (Hr t o Ho).
    specialize (HPn i o Hi Ho). lra.
Qed.

(** direct = "min": two upper bounds of the same quantity; their minimum is one. *)
Lemma coeffs_min : forall (x a1 a2 : R), x <= a1 -> x <= a2 -> x <= Rmin a1 a2.
Proof. intros; apply Rmin_glb; assumption. Qed.

(* ... also for alpha_P, to which rho t is added after the minimum *)
Lemma coeffs_min_shift : forall (x a1 a2 r : R), x <= a1 + r -> x <= a2 + r -> x <= Rmin a1 a2 + r.
Proof. intros x a1 a2 r H1 H2. unfold Rmin. destruct (Rle_dec a1 a2); lra. Qed.
